"""A Spark standalone cluster that the suite starts and arfl does not know about (only its
``spark://`` URL): ``kill-executor`` goes through Spark's cluster manager, not a local pid."""

from __future__ import annotations

from pathlib import Path

import psutil
from deploy_checks import check_against_offline, journal_events, windowed_spec

from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.processes import wait_until
from arfl.stack import StackInfo
from arfl.targets.local import executors_of_app
from arfl.testing.spark import StandaloneCluster


def test_kill_executor_on_a_standalone_cluster_asks_its_manager(
    stack: StackInfo, tmp_path: Path
) -> None:
    """The driver asks the master to kill executor 0 and the master's worker launches a
    replacement for the same application; the checkpointed query goes on, complete and exact."""
    with StandaloneCluster(tmp_path / "cluster", cores=1) as cluster:
        spec = windowed_spec(
            "cluster-manager",
            mode="passive",
            # The replacement comes 2-3 s after the kill: 14 s of input leave room for it.
            duration="14s",
            chaos=[{"at": "5s", "fault": "kill-executor", "replica": 0}],
        )
        result = deploy(
            spec, None, DeployOptions(runs_root=tmp_path / "runs", master=cluster.master_url)
        )
        [inj] = [e for e in journal_events(result.run_dir, "fault-injected")]
        assert inj["kind"] == "kill-executor"
        details = inj["details"]
        # Through the driver's Spark context: no pid was signalled.
        assert details["via"] == "spark" and "pid" not in details, details
        assert details["executor"] == "0" and details["executors_before"] == ["0"], details
        [rev] = journal_events(result.run_dir, "fault-reverted")
        new = rev["details"]["replacement_executor"]
        assert rev["details"]["replacement_s"] is not None and new not in ("0", None), rev
        # The worker killed executor 0 on the master's order and launched the replacement.
        worker_log = (cluster.base_dir / "worker.log").read_text(errors="replace")
        [app] = [e["app_id"] for e in journal_events(result.run_dir, "replica-ready")]
        assert f"Asked to kill executor {app}/0" in worker_log, worker_log[-3000:]
        assert f"Asked to launch executor {app}/{new}" in worker_log, worker_log[-3000:]
        assert not [e for e in journal_events(result.run_dir, "replica-died")]
        check_against_offline(stack, spec, result)
        # Nothing of the application is left on the worker once the deployment stopped (the
        # worker ends them on its own time: they are not in the driver's process tree).
        wait_until(
            lambda: not [p for p in executors_of_app(app).values() if psutil.pid_exists(p)],
            timeout_s=60,
            what="the application's executors to exit",
        )
