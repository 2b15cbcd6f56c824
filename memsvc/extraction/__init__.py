"""Facts drawn from conversations by a chat model: the prompt, the call, the answer."""
