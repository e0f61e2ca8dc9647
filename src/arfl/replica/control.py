"""What a replica's driver does for a request through its Spark context: the way to a
cluster's executors.

A replica on a cluster arfl did not start (``spark://...``) has executors that are not
processes of this host, so a fault cannot signal them; the cluster manager can, when the
application asks (requests arrive through :mod:`arfl.run.control`):

* ``executors``: ``{"executors": [ids]}``, the application's live executors;
* ``kill-executor`` (``executor``: an id, default the lowest): Spark's
  ``SparkContext.killAndReplaceExecutor`` asks the cluster manager to kill it without lowering
  the application's executor target, so the manager launches a replacement (standalone, YARN
  and Kubernetes alike). The public ``killExecutor`` lowers the target, and the application
  would then run one executor short.
"""

from __future__ import annotations

from typing import Any

from arfl.run.control import executor_order


class SparkControl:
    """What a request can do, over a py4j ``SparkContext`` (``sc._jsc.sc()``)."""

    def __init__(self, jsc: Any) -> None:
        self._jsc = jsc

    def executors(self) -> list[str]:
        """The live executors' ids (``getExecutorIds``: Spark's own allocation client view)."""
        text = str(self._jsc.getExecutorIds().mkString(","))
        return sorted((e for e in text.split(",") if e), key=executor_order)

    def kill_executor(self, executor: str | None) -> dict[str, Any]:
        """Ask the cluster manager to kill ``executor`` (default the lowest) and replace it."""
        before = self.executors()
        if not before:
            raise ValueError("the application has no executor")
        exe = executor if executor is not None else before[0]
        if exe not in before:
            raise ValueError(f"no executor {exe!r} (running: {', '.join(before)})")
        accepted = bool(self._jsc.killAndReplaceExecutor(exe))
        return {"executor": exe, "executors": before, "accepted": accepted}

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request's answer: ``{"ok": True, ...}`` or ``{"ok": False, "error": ...}``."""
        op = request.get("op")
        try:
            if op == "executors":
                return {"ok": True, "executors": self.executors()}
            if op == "kill-executor":
                exe = request.get("executor")
                return {"ok": True, **self.kill_executor(None if exe is None else str(exe))}
        except Exception as e:  # the answer carries the driver's error to the fault
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}
        return {"ok": False, "error": f"unknown request {op!r}"}
