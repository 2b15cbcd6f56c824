"""One module per tRPC router; each holds a :class:`memsvc.trpc.Router`."""
