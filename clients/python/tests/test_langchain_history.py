"""memsvc_client.langchain.MemsvcChatMessageHistory on langchain-core itself, against a real
memsvc server."""

from __future__ import annotations

import asyncio
import typing as t

import pytest
from client_support import DroppingProxy
from client_support import Recorder
from langchain_core._api.deprecation import LangChainDeprecationWarning
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage
from langchain_core.messages import AIMessageChunk
from langchain_core.messages import BaseMessage
from langchain_core.messages import ChatMessage
from langchain_core.messages import HumanMessage
from langchain_core.messages import SystemMessage
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory
from memsvc_client import AsyncMemsvc
from memsvc_client import BadRequest
from memsvc_client import ConnectionFailed
from memsvc_client import Memsvc
from memsvc_client import NotFound
from memsvc_client.langchain import MemsvcChatMessageHistory
from memsvc_server import Server

pytestmark = pytest.mark.e2e

SESSION = "trip"


def conversation() -> list[BaseMessage]:
    """One message of each kind memsvc stores, with names and ids."""
    return [
        SystemMessage("You plan trips.", id="s1"),
        HumanMessage("We land in Kyoto on the 3rd of May", name="Hana", id="h1"),
        AIMessage("Shall I look for a ryokan near Gion?", id="a1"),
        ToolMessage("3 ryokans free", tool_call_id="", name="hotel_search", id="t1"),
        AIMessage("Three are free.", name="planner", id="a2"),
    ]


def history(client: Memsvc | AsyncMemsvc, user: str, **options: t.Any) -> MemsvcChatMessageHistory:
    return MemsvcChatMessageHistory(client=client, user_id=user, session_id=SESSION, **options)


def test_every_kind_of_message_comes_back_as_it_was_added(memsvc: Memsvc, user: str) -> None:
    chat = history(memsvc, user)
    assert isinstance(chat, BaseChatMessageHistory)
    assert chat.messages == []  # no session yet

    chat.add_messages(conversation())

    back = chat.messages
    assert back == conversation()  # class, text, name and id of each
    assert [type(m) for m in back] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
    ]
    # In memsvc: the session's messages, with roles, speakers and message ids.
    stored = memsvc.session(user, SESSION)
    assert [(m.role, m.speaker, m.message_id, m.position) for m in stored] == [
        ("system", None, "s1", 0),
        ("user", "Hana", "h1", 1),
        ("assistant", None, "a1", 2),
        ("tool", "hotel_search", "t1", 3),
        ("assistant", "planner", "a2", 4),
    ]
    assert {m.kind for m in stored} == {"message"} and stored[1].content == back[1].content

    # A chunk of a streamed answer is stored as its class's role, and read back as that class.
    chat.add_message(AIMessageChunk("Booked.", id="a3"))
    assert chat.messages[-1] == AIMessage("Booked.", id="a3")


def test_a_conversation_stored_by_another_client_reads_as_langchain_messages(
    memsvc: Memsvc, user: str
) -> None:
    memsvc.ingest(
        user,
        [
            {"role": "user", "name": "Hana", "content": "Any trains to Nara?"},
            {"role": "tool", "content": "every 10 minutes"},
            {"role": "assistant", "content": "Every ten minutes.", "id": "x"},
        ],
        session_id=SESSION,
    )
    assert history(memsvc, user).messages == [
        HumanMessage("Any trains to Nara?", name="Hana"),  # no message id: id None
        ToolMessage("every 10 minutes", tool_call_id=""),
        AIMessage("Every ten minutes.", id="x"),
    ]


def test_messages_come_back_in_the_order_of_the_calls(memsvc: Memsvc, user: str) -> None:
    chat = history(memsvc, user)
    chat.add_user_message("one")
    chat.add_ai_message("two")
    chat.add_messages([HumanMessage("three"), AIMessage("four")])
    chat.add_message(HumanMessage("five"))
    assert [(m.type, m.content) for m in chat.messages] == [
        ("human", "one"),
        ("ai", "two"),
        ("human", "three"),
        ("ai", "four"),
        ("human", "five"),
    ]
    assert [m.position for m in memsvc.session(user, SESSION)] == [0, 1, 2, 3, 4]


def test_each_add_is_one_ingest_and_messages_without_ids_get_one(
    server: Server, api_key: str, recorder: Recorder, user: str
) -> None:
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as memsvc:
        chat = history(memsvc, user)
        added: list[BaseMessage] = [HumanMessage("Hello"), AIMessage("Hi Hana", id="mine")]
        chat.add_messages(added)
        chat.add_messages([])  # nothing to store: nothing sent

        (sent,) = recorder.inputs("memory.ingest")
        assert sent["sessionId"] == SESSION and sent["userId"] == user
        assert [m["role"] for m in sent["messages"]] == ["user", "assistant"]
        # The id given is kept; the message without one was given a UUID, on the message itself.
        assert added[1].id == "mine" and added[0].id is not None and len(added[0].id) == 36
        assert [m["id"] for m in sent["messages"]] == [added[0].id, "mine"]
        assert chat.messages == added

        # The same messages again (the application retrying): nothing stored twice. Ids
        # identify a session's messages: another message under an id it holds is not stored.
        chat.add_messages(added)
        chat.add_messages([AIMessage("Something else", id="mine")])
        assert chat.messages == added and len(memsvc.session(user, SESSION)) == 2


def test_an_add_whose_answer_was_lost_stores_nothing_twice(
    server: Server,
    api_key: str,
    memsvc: Memsvc,
    user: str,
    dropping_proxy: t.Callable[[int], DroppingProxy],
) -> None:
    # The client sends the call again by itself: every message has an id.
    proxy = dropping_proxy(1)
    with Memsvc(proxy.url, api_key=api_key) as lossy:
        history(lossy, user).add_messages([HumanMessage("Hello"), AIMessage("Hi")])
    assert proxy.dropped == 1 and proxy.requests == 2
    assert [m.content for m in history(memsvc, user).messages] == ["Hello", "Hi"]

    # Without retries the caller sees the lost answer, and sends the same messages again.
    proxy = dropping_proxy(1)
    again = [HumanMessage("Book the second one"), AIMessage("Booked")]
    with Memsvc(proxy.url, api_key=api_key, max_retries=0) as lossy:
        chat = history(lossy, user)
        with pytest.raises(ConnectionFailed) as lost:
            chat.add_messages(again)
        assert lost.value.request_sent
        chat.add_messages(again)
    assert [m.content for m in history(memsvc, user).messages] == [
        "Hello",
        "Hi",
        "Book the second one",
        "Booked",
    ]


def test_a_session_longer_than_a_page_is_read_page_by_page(
    server: Server, api_key: str, recorder: Recorder, user: str
) -> None:
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as memsvc:
        chat = history(memsvc, user, page_size=2)
        chat.add_messages([HumanMessage(f"message {i}") for i in range(5)])
        assert [m.content for m in chat.messages] == [f"message {i}" for i in range(5)]
        pages = recorder.inputs("memory.session")
        assert [(p["limit"], p.get("after")) for p in pages] == [(2, None), (2, 1), (2, 3)]
        # The default page is memsvc's largest: one call.
        assert len(history(memsvc, user).messages) == 5
        assert recorder.inputs("memory.session")[-1]["limit"] == 1000


def test_content_blocks_of_text_are_joined_and_others_refused(memsvc: Memsvc, user: str) -> None:
    chat = history(memsvc, user)
    blocks = HumanMessage(["Look at ", {"type": "text", "text": "this ryokan"}])
    chat.add_messages([blocks])
    (back,) = chat.messages
    assert back.content == "Look at this ryokan" == blocks.text  # LangChain's own joining

    image = {"type": "image", "url": "https://example.com/gion.png"}
    with pytest.raises(ValueError, match=r"messages\[1\].*'image' block.*content=message\.text"):
        chat.add_messages([HumanMessage("Here it is"), HumanMessage(["Gion", image])])
    assert len(chat.messages) == 1  # all or none: the first was not stored either


def test_messages_memsvc_has_no_role_for_are_refused(memsvc: Memsvc, user: str) -> None:
    chat = history(memsvc, user)
    with pytest.raises(TypeError, match=r"messages\[1\].*not ChatMessage"):
        chat.add_messages([HumanMessage("Hi"), ChatMessage("Hello", role="narrator")])
    assert chat.messages == []


def test_tool_calls_are_not_kept_and_a_message_with_no_text_is_refused(
    memsvc: Memsvc, user: str
) -> None:
    chat = history(memsvc, user)
    call = {"name": "hotel_search", "args": {"city": "Kyoto"}, "id": "call-1"}
    chat.add_messages(
        [
            AIMessage("Let me look.", tool_calls=[call], id="a1"),
            ToolMessage("3 free", tool_call_id="call-1", id="t1"),
        ]
    )
    asked, answered = chat.messages
    # memsvc keeps the text, name and id: the call and its id do not come back.
    assert (
        isinstance(asked, AIMessage) and asked.tool_calls == [] and asked.content == "Let me look."
    )
    assert isinstance(answered, ToolMessage) and answered.tool_call_id == ""

    # A message that only calls tools has no text: memsvc refuses the call, and stores none of it.
    with pytest.raises(BadRequest, match=r"messages\[1\]\.content"):
        chat.add_messages([HumanMessage("And in Osaka?"), AIMessage("", tool_calls=[call])])
    assert len(chat.messages) == 2


def test_clear_deletes_the_sessions_messages_one_call_each(
    server: Server, api_key: str, recorder: Recorder, memsvc: Memsvc, user: str
) -> None:
    memsvc.add(user, "Hana prefers aisle seats")
    other = MemsvcChatMessageHistory(client=memsvc, user_id=user, session_id="other")
    other.add_user_message("Another conversation")
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as client:
        chat = history(client, user)
        chat.add_messages(conversation())

        chat.clear()

        assert recorder.procedures().count("memory.delete") == 5
        assert chat.messages == []
        chat.clear()  # nothing left: nothing deleted
        assert recorder.procedures().count("memory.delete") == 5
    with pytest.raises(NotFound):
        memsvc.session(user, SESSION)
    # Nothing else of the user's went.
    assert [m.content for m in other.messages] == ["Another conversation"]
    assert [s.session_id for s in memsvc.sessions(user)] == ["other"]
    assert len(memsvc.get_all(user)) == 2
    # The session starts again from nothing; the ids it held are free again.
    chat = history(memsvc, user)
    chat.add_messages(conversation()[:2])
    assert chat.messages == conversation()[:2]


def test_no_other_users_or_tenants_session_of_the_same_id_is_read_or_cleared(
    server: Server, memsvc: Memsvc, user: str
) -> None:
    mine = history(memsvc, user)
    mine.add_user_message("mine")
    other_user = history(memsvc, f"{user}-other")
    assert other_user.messages == []
    other_user.add_user_message("another user's")
    with Memsvc(server.url, api_key=server.create_key("other-tenant", "history")) as other:
        other_tenant = history(other, user)  # the same user and session ids, another tenant
        assert other_tenant.messages == []
        other_tenant.add_user_message("another tenant's")
        mine.clear()
        assert [m.content for m in other_tenant.messages] == ["another tenant's"]
        other_tenant.clear()
    assert [m.content for m in other_user.messages] == ["another user's"]
    assert mine.messages == []


def test_async_with_either_client(server: Server, api_key: str, memsvc: Memsvc, user: str) -> None:
    async def scenario() -> None:
        async with AsyncMemsvc(server.url, api_key=api_key) as client:
            native = history(client, user, page_size=2)
            threaded = history(memsvc, user)
            assert await native.aget_messages() == []
            await native.aadd_messages(conversation()[:3])
            await threaded.aadd_messages(conversation()[3:])
            assert await native.aget_messages() == await threaded.aget_messages() == conversation()
            await native.aclear()
            assert await threaded.aget_messages() == []
            await threaded.aadd_messages(conversation())
            await threaded.aclear()
            assert await native.aget_messages() == []
            await native.aclear()  # no session: nothing to do

    asyncio.run(scenario())
    with pytest.raises(NotFound):
        memsvc.session(user, SESSION)


def test_an_async_client_says_the_sync_methods_need_a_sync_one(
    server: Server, api_key: str, user: str
) -> None:
    async def scenario() -> None:
        async with AsyncMemsvc(server.url, api_key=api_key) as client:
            chat = history(client, user)
            with pytest.raises(TypeError, match="async methods only.*for messages"):
                _ = chat.messages
            with pytest.raises(TypeError, match="for add_messages"):
                chat.add_user_message("hi")
            with pytest.raises(TypeError, match="for clear"):
                chat.clear()

    asyncio.run(scenario())


def test_its_settings_are_checked_when_it_is_made(memsvc: Memsvc) -> None:
    with pytest.raises(TypeError, match="Memsvc or an AsyncMemsvc"):
        MemsvcChatMessageHistory(client="http://127.0.0.1:8000", user_id="u", session_id="s")  # type: ignore[arg-type]
    for page_size in (0, 1001):
        with pytest.raises(ValueError, match="page_size"):
            MemsvcChatMessageHistory(
                client=memsvc, user_id="u", session_id="s", page_size=page_size
            )
    assert "api" not in repr(history(memsvc, "u")).lower()


def test_langchains_runnable_with_message_history_runs_on_it(memsvc: Memsvc, user: str) -> None:
    seen: list[list[str]] = []

    def model(messages: list[BaseMessage]) -> str:
        seen.append([str(m.content) for m in messages])
        return f"You said: {messages[-1].content}"

    # Deprecated by langchain-core 1.3.3 (in favour of LangGraph's persistence), still in 1.x.
    with pytest.warns(LangChainDeprecationWarning):
        chain = RunnableWithMessageHistory(
            RunnableLambda(model),
            lambda session_id: MemsvcChatMessageHistory(
                client=memsvc, user_id=user, session_id=session_id
            ),
        )
    config = {"configurable": {"session_id": SESSION}}
    chain.invoke("Hello", config)  # type: ignore[arg-type]
    answer = asyncio.run(chain.ainvoke("Kyoto, please", config))  # type: ignore[arg-type]

    assert answer == "You said: Kyoto, please"
    assert seen[-1] == ["Hello", "You said: Hello", "Kyoto, please"]
    assert [(m.type, m.content) for m in history(memsvc, user).messages] == [
        ("human", "Hello"),
        ("ai", "You said: Hello"),
        ("human", "Kyoto, please"),
        ("ai", "You said: Kyoto, please"),
    ]
