"""Chromium's processes as /proc shows them (NFR-31, docs/design/browser.md): the main Chromium
processes under this one, whether one is still alive, and killing what is left of one (its
process group). The pool that starts and retires them is apps/scraping/browser.py.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

# The program names of a main Chromium process (Debian's, Google's, Playwright's headless shell).
_CHROMIUM_NAMES = frozenset({b"chromium", b"chrome", b"chromium-browser", b"headless_shell"})


def process_tree(root: int) -> list[int]:
    """The descendants of ``root``, from /proc (empty where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return []
    for entry in entries:
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def main_chromiums(root: int | None = None) -> set[int]:
    """The main Chromium processes under ``root`` (this process by default); its helpers rewrite
    their command line into one string holding ``--type=``."""
    found = set()
    for pid in process_tree(os.getpid() if root is None else root):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].rsplit(b"/", 1)[-1] in _CHROMIUM_NAMES and not any(b"--type=" in arg for arg in argv):
            found.add(pid)
    return found


def process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def process_group_kill(pid: int) -> None:
    """Kill what is left of a Chromium: its process group (Playwright starts it as the leader of
    one, and its helpers stay in it). Its helpers hold the pipe to Playwright open, so until they
    are gone Playwright would not notice that the browser died."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
