"""How `threadloom show` prints a transcript page: plain text or markdown.

CLI layer, pure: takes the page as `show --json` gives it (`engine.transcript.
transcript_json`, values in `protocol.plain` form) and returns lines. Tool calls and
results are shown on one line each; content longer than `LARGE` characters is cut to
`PREVIEW` with its size; tagged values (bytes, unread payloads, secrets) by what they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from threadloom.protocol.plain import text

#: Characters of a message's content shown whole; longer content is summarized.
LARGE = 2000
#: Characters shown of summarized content.
PREVIEW = 200
#: Characters of a tool call's arguments or a tool result's first line.
LINE = 100


def transcript(page: Mapping[str, Any]) -> list[str]:
    """The page as plain text: a block per message, tool calls and results compact."""
    messages = page["messages"]
    if messages:
        first, last = messages[0]["index"], messages[-1]["index"]
        span = f"messages {first}-{last} of {page['total']}"
    else:
        span = f"no messages (of {page['total']})"
    lines = [
        f"thread {page['thread_id']}{_status(page)}: {span}, "
        f"checkpoint {page['checkpoint_id'] or '-'}"
    ]
    if page["older"] is not None:
        lines.append(f"older: --before {page['older']}")
    for item in messages:
        name = f" {item['name']}" if item.get("name") and item["type"] != "tool" else ""
        lines += ["", f"[{item['index']}] {item['type']}{name}"]
        lines += ["  " + line for line in _message_lines(item)]
    for found in page["interrupts"]:
        lines += [
            "",
            f"interrupted: {found['node'] or 'a task'} waits for {_json_line(found['value'])}",
        ]
    for failed in page.get("errors") or ():
        lines += ["", f"error: {failed['node'] or 'a task'} failed: {_error(failed['error'])}"]
    return lines


def _error(error: Any) -> str:
    """A failed task's recorded error on one line (LangGraph records its repr)."""
    return cut(error, LINE) if isinstance(error, str) else _json_line(error)


def _status(page: Mapping[str, Any]) -> str:
    """The thread's status after its id, ` (interrupted)`; nothing when idle or unknown."""
    status = page.get("status")
    return f" ({status})" if status and status != "idle" else ""


def _message_lines(item: Mapping[str, Any]) -> list[str]:
    if item["type"] == "value":
        return [_json_line(item["value"], LARGE)]
    if item["type"] == "tool":
        return [_tool_result(item)]
    lines = _content(item["content"]).splitlines()
    for call in item.get("tool_calls") or ():
        lines.append(f"→ {_call(call)}")
    return lines


def _content(content: Any) -> str:
    """A message's content as text, large content summarized with its size."""
    if isinstance(content, Mapping) and _tagged(content):
        return _json_line(content, LARGE)
    shown = text(content)
    if len(shown) <= LARGE:
        return shown
    return f"{shown[:PREVIEW]}… ({len(shown.encode())} bytes)"


def _call(call: Mapping[str, Any]) -> str:
    return f"{call.get('name') or '?'}({_json_line(call.get('args'))})"


def _tool_result(item: Mapping[str, Any]) -> str:
    content = item["content"]
    tagged = isinstance(content, Mapping) and _tagged(content)
    whole = _json_line(content, LARGE) if tagged else text(content)
    lines = whole.splitlines() or [""]
    first = cut(lines[0], LINE)
    if len(lines) > 1 and not first.endswith("…"):
        first += "…"
    who = item.get("name") or item.get("tool_call_id") or "tool"
    failed = " [error]" if item.get("status") == "error" else ""
    return f"← {who}: {first} ({len(whole.encode())} bytes){failed}"


def _json_line(value: Any, limit: int = LINE) -> str:
    shown = json.dumps(brief(value), ensure_ascii=False, separators=(",", ":"))
    if len(shown) <= limit:
        return shown
    return f"{shown[: min(limit, PREVIEW)]}… ({len(shown.encode())} bytes)"


def cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _tagged(value: Mapping[str, Any]) -> bool:
    return any(key in value for key in ("$bytes", "$unreadable", "$masked", "$map"))


def brief(value: Any) -> Any:
    """A plain value with its tagged leaves shown short: bytes and unread values by
    their size, secrets by their class (`protocol.plain`'s tags)."""
    if isinstance(value, list):
        return [brief(item) for item in value]
    if not isinstance(value, Mapping):
        return value
    if "$bytes" in value:
        return f"<{value.get('size', '?')} bytes>"
    if "$unreadable" in value:
        return f"<unreadable {value['$unreadable']}, {value.get('size', '?')} bytes>"
    if value.get("$masked"):
        return f"<secret {value.get('$type', '')}>"
    if "$map" in value and isinstance(value["$map"], Mapping):
        return {key: brief(item) for key, item in value["$map"].items()}
    return {key: brief(item) for key, item in value.items()}


def markdown(page: Mapping[str, Any], title: str | None) -> list[str]:
    """The page as a markdown transcript."""
    messages = page["messages"]
    lines = [f"# {title or page['thread_id']}", ""]
    span = (
        f"messages {messages[0]['index']}–{messages[-1]['index']} of {page['total']}"
        if messages
        else f"no messages (of {page['total']})"
    )
    thread, checkpoint = _code(page["thread_id"]), _code(page["checkpoint_id"] or "-")
    lines += [f"Thread {thread}{_status(page)}, checkpoint {checkpoint}, {span}."]
    for item in messages:
        name = f" {_code(item['name'])}" if item.get("name") else ""
        lines += ["", f"### {item['index']} · {item['type']}{name}", ""]
        if item["type"] == "value":
            lines += _fenced(_json_line(item["value"], LARGE))
        elif item["type"] == "tool":
            lines.append(f"- {_tool_result(item)}")
        else:
            content = _content(item["content"])
            if content:
                lines.append(content)
            calls = item.get("tool_calls") or ()
            if content and calls:
                lines.append("")
            lines += [f"- tool call {_code(_call(call))}" for call in calls]
    for found in page["interrupts"]:
        lines += [
            "",
            f"> **Interrupted**: {_code(found['node'] or 'a task')} waits for "
            f"{_code(_json_line(found['value']))}",
        ]
    for failed in page.get("errors") or ():
        lines += [
            "",
            f"> **Error**: {_code(failed['node'] or 'a task')} failed: "
            f"{_code(_error(failed['error']))}",
        ]
    return lines


def _code(body: str) -> str:
    """`body` as a markdown code span, whatever backticks it holds."""
    ticks = "`"
    while ticks in body:
        ticks += "`"
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{ticks}{pad}{body}{pad}{ticks}"


def _fenced(body: str) -> list[str]:
    fence = "```"
    while fence in body:
        fence += "`"
    return [fence, body, fence]
