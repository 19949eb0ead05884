"""Chat with a naas Agent inside a naas Engine loaded from a project, in the naas venv.

Usage: python naas_engine_chat.py [--activity-log] [--bind FILE] PROJECT_DIR THREAD_ID [MESSAGE...]

Changes to PROJECT_DIR (written by tests/naas/_project.py), loads `Engine()` from its
`config.yaml` (`engine.load()`), builds a naas `Agent` with `memory=None`, so that it
takes the engine's agent checkpointer (`get_default_agent_checkpointer()`, the document
service's `DocumentCheckpointSaver` when the project loads one), and a deterministic
chat model, then sends each MESSAGE on THREAD_ID with `Agent.invoke` (none: only read
the thread). The thread id goes in through the agent's `AgentSharedState(thread_id=...)`:
`Agent.stream` runs the graph with `{"configurable": {"thread_id": state.thread_id}}`.

Prints one JSON object on stdout, then shuts the engine down:

- `checkpointer`: the agent's checkpointer class, `module.qualname`;
- `replies`: what each `invoke` returned;
- `messages`: the thread's state after the last turn, `[{"type", "content"}]`;
- `checkpoints`: how many checkpoints the checkpointer lists for the thread;
- `activity`: with --activity-log, the events this run recorded in the engine's activity
  log (one per MESSAGE, actor ACTOR) and read back; else null;
- `seconds`: `import` (naas), `load` (`Engine()` + `load()`), `chat`; `turns`: the
  seconds of each `invoke`;
- `bound`: with --bind FILE (`threadloom.naas.bind(FILE)` before the engine loads),
  whether the agent's checkpointer is the bound saver and whether `engine.shutdown()`
  closed it; else null.

The reply to a message is "echo: <message> (turn N)", N counting the human messages the
model was sent: a thread continued from an earlier process answers with N > 1.

In NATS mode (a client engine, `_project.write_project(nats=True)`) the agents' events
are not published: no engine serves the event service in these tests.

naas reads POSTGRES_URL (agent memory outside NATS mode goes there first), ENV (another
config file; a random thread id with ENV=dev) and ABI_CONFIG_OVERLAY: they are removed
here, so the caller's environment cannot change what the project says.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

USAGE = (
    "Usage: python naas_engine_chat.py [--activity-log] [--bind FILE] "
    "PROJECT_DIR THREAD_ID [MESSAGE...]"
)
ACTOR = "user:threadloom-tests"


def echo_model() -> Any:
    """A chat model that answers "echo: <last human message> (turn N)".

    `bind_tools` returns the model itself, so the agent binds its default tools without
    the "does not support tool calling" fallback; the model never calls them.
    """
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class EchoChatModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "threadloom-echo"

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
        ) -> ChatResult:
            humans = [message for message in messages if isinstance(message, HumanMessage)]
            text = f"echo: {humans[-1].content} (turn {len(humans)})"
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

        def bind_tools(self, tools: Any, **_: Any) -> EchoChatModel:
            return self

    return EchoChatModel()


def qualified(value: object) -> str:
    """`module.qualname` of `value`'s class."""
    return f"{type(value).__module__}.{type(value).__qualname__}"


def main(argv: list[str]) -> int:
    """Load the engine, chat, shut the engine down, print the JSON report."""
    activity_log, bind = False, None
    while argv[:1] in (["--activity-log"], ["--bind"]):
        if argv[0] == "--bind" and len(argv) > 1:
            bind, argv = argv[1], argv[2:]
        elif argv[0] == "--activity-log":
            activity_log, argv = True, argv[1:]
        else:
            break
    if len(argv) < 2 or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    project, thread_id, messages = argv[0], argv[1], argv[2:]
    for name in ("POSTGRES_URL", "ENV", "ABI_CONFIG_OVERLAY"):
        os.environ.pop(name, None)
    # Before any naas import: importing Agent.py finds its cache's storage/ from here.
    os.chdir(project)
    sys.path.insert(0, os.getcwd())  # the project's own module

    started = time.perf_counter()
    from naas_abi_core.engine.context import set_default_event_service
    from naas_abi_core.engine.Engine import Engine
    from naas_abi_core.services.agent.Agent import Agent, AgentSharedState

    imported = time.perf_counter()
    saver = None
    if bind is not None:
        import threadloom.naas

        saver = threadloom.naas.bind(bind)
    engine = Engine()
    engine.load()
    if engine.configuration.nats is not None:
        # A client engine's event service is the serving engine's, over NATS; no engine
        # serves in these tests, and each agent event would wait out the SDK's 5 s of
        # "no responders" retries (naas_abi_sdk.no_responders) before being dropped.
        set_default_event_service(None)
    loaded = time.perf_counter()
    try:
        agent = Agent(
            name="threadloom_echo",
            description="Answers with what it was told.",
            chat_model=echo_model(),
            memory=None,
            state=AgentSharedState(thread_id=thread_id),
        )
        replies, turns = [], []
        for message in messages:
            turn = time.perf_counter()
            replies.append(agent.invoke(message))
            turns.append(round(time.perf_counter() - turn, 6))
        activity = record_activity(engine, len(messages)) if activity_log else None
        config = {"configurable": {"thread_id": thread_id}}
        state = agent.graph.get_state(config)
        report: dict[str, Any] = {
            "checkpointer": qualified(agent._checkpointer),
            "replies": replies,
            "messages": [
                {"type": message.type, "content": message.content}
                for message in state.values.get("messages", [])
            ],
            "checkpoints": len(list(agent._checkpointer.list(config))),
            "activity": activity,
            "seconds": {
                "import": round(imported - started, 3),
                "load": round(loaded - imported, 3),
                "chat": round(time.perf_counter() - loaded, 3),
                "turns": turns,
            },
            "bound": None if saver is None else {"used": agent._checkpointer is saver},
        }
    finally:
        engine.shutdown()
    if saver is not None:
        report["bound"]["closed"] = saver._closed
    print(json.dumps(report), flush=True)
    return 0


def record_activity(engine: Any, count: int) -> list[dict[str, Any]]:
    """Record `count` events in the engine's activity log; its events after the newest before."""
    from naas_abi_core.services.activity_log.ActivityLogPort import (
        ActivityEvent,
        ActivityLogQuery,
    )

    log = engine.services.activity_log
    newest = log.query(ACTOR, ActivityLogQuery(newest_first=True, limit=1))
    after = newest[0].seq if newest and newest[0].seq is not None else 0
    for index in range(count):
        log.record(
            ActivityEvent(actor_id=ACTOR, event_type="chat.message", attributes={"message": index})
        )
    return [
        {"seq": event.seq, "event_type": event.event_type, "attributes": event.attributes}
        for event in log.query(ACTOR, ActivityLogQuery(after_seq=after))
    ]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
