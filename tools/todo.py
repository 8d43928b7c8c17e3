"""TodoWrite: the trajectory's plan, replaced as a whole and echoed back as text."""

from __future__ import annotations

from cuda_agent.tools.args import TodoItem, TodoWriteArgs
from cuda_agent.tools.observation import ToolObservation
from cuda_agent.tools.registry import tool
from cuda_agent.tools.session import ToolSession

_MARKS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


def render_todos(todos: list[TodoItem]) -> str:
    """The list as the model sees it: one line per item with a status mark."""
    if not todos:
        return "Todo list is empty."
    counts = {status: sum(t.status == status for t in todos) for status in _MARKS}
    head = (
        f"Todo list ({len(todos)} items: {counts['completed']} completed, "
        f"{counts['in_progress']} in progress, {counts['pending']} pending):"
    )
    lines = [
        f"{_MARKS[t.status]} {t.activeForm if t.status == 'in_progress' else t.content}" for t in todos
    ]
    return "\n".join([head, *lines])


@tool("TodoWrite", TodoWriteArgs)
async def todo_write(session: ToolSession, args: TodoWriteArgs) -> ToolObservation:
    """Replace the session's todo list."""
    session.todos = list(args.todos)
    text = render_todos(session.todos)
    if sum(t.status == "in_progress" for t in session.todos) > 1:
        text += "\nNote: keep exactly one item in_progress at a time."
    return ToolObservation(name="TodoWrite", text=text, metrics={"todos": float(len(session.todos))})
