"""The run journal's events (``journal.jsonl``): one definition per event name.

Every writer passes an :class:`Event` to :meth:`arfl.run.rundir.Journal.write` and every reader
(the report, the summary, the independent check) matches members, not strings. A line is
``{"t": <epoch seconds>, "event": "<name>", ...fields}``; under each member: the fields its
writers add, and who writes it.
"""

from __future__ import annotations

from enum import StrEnum


class Event(StrEnum):
    """A journal event's name (its value is what the line holds)."""

    DIVERGENCE = "divergence"
    """Fields: those of a record passed along. Written by measure/merger/process.py."""
    DIVERGENCE_SUPPRESSED = "divergence_suppressed"
    """Fields: message. Written by measure/merger/process.py."""
    DOCKER_IMAGE = "docker-image"
    """Fields: build_s, built, image, size_bytes. Written by orchestrate/network.py."""
    DOCKER_NETWORK_CREATED = "docker-network-created"
    """Fields: those of a record passed along. Written by orchestrate/network.py."""
    DOCKER_REMOVED = "docker-removed"
    """Fields: removed. Written by orchestrate/network.py."""
    FAULT_ALIGNED = "fault-aligned"
    """Fields: after_s, boundary, boundary_replica, kind, replica, seen, waited_s. Written by
    faults/runner.py."""
    FAULT_FAILED = "fault-failed"
    """Fields: error, kind, replica. Written by faults/runner.py."""
    FAULT_INJECTED = "fault-injected"
    """Fields: at_s, description, details, duration_s, ended, kind, replica, started. Written by
    faults/runner.py."""
    FAULT_REVERTED = "fault-reverted"
    """Fields: at_s, description, details, duration_s, ended, kind, recovered, replica, started,
    and those of a record passed along. Written by faults/runner.py."""
    HARNESS_PRIORITY = "harness-priority"
    """Fields: asked, pid, process, and those of a record passed along. Written by
    orchestrate/deploy.py."""
    INJECTOR_FINISHED = "injector_finished"
    """Fields: those of a record passed along. Written by workload/produce.py."""
    INJECTOR_STARTED = "injector_started"
    """Fields: duration_s, events, linger_ms, rate, replay, seed, t0, topic. Written by
    workload/injector.py, workload/replay.py."""
    INTERRUPT_IGNORED = "interrupt-ignored"
    """Fields: during, signals. Written by orchestrate/deploy.py, orchestrate/supervisor.py."""
    ISOLATION_CREATED = "isolation-created"
    """Fields: those of a record passed along. Written by orchestrate/network.py."""
    ISOLATION_REMOVED = "isolation-removed"
    """Fields: removed. Written by orchestrate/network.py."""
    LATE_DROP = "late-drop"
    """Fields: those of a record passed along. Written by orchestrate/watch.py."""
    LEADER_ELECTED = "leader-elected"
    """Fields: previous, replica. Written by orchestrate/watch.py."""
    LEFTOVER_STOPPED = "leftover-stopped"
    """Fields: killed, pid, pids, process, services, survivors. Written by faults/runner.py."""
    MERGER_EXITED = "merger-exited"
    """Fields: exit_code. Written by orchestrate/deploy.py."""
    MERGER_ORPHANED = "merger-orphaned"
    """Fields: message, owner_create_time, owner_pid. Written by measure/merger/process.py."""
    MERGER_FINISHED = "merger_finished"
    """Fields: those of a record passed along. Written by measure/merger/process.py."""
    MERGER_DIED = "merger-died"
    """Fields: exit_code, pid. Written by orchestrate/watch.py."""
    MERGER_FENCED = "merger-fenced"
    """Fields: message. Written by measure/merger/process.py."""
    MERGER_REFENCED = "merger-refenced"
    """Fields: again, message, refence_s, unsent. Written by measure/merger/process.py."""
    MERGER_RESENT = "merger-resent"
    """Fields: again, failed, in_sink. Written by measure/merger/process.py."""
    MERGER_TOOK_OVER = "merger-took-over"
    """Fields: detected, fenced_s, fresh, fresh_s, init_s, owed, pid, results, took_s, why.
    Written by measure/merger/process.py."""
    MERGER_RECOVERED = "merger-recovered"
    """Fields: positions, recover_s, results, tail. Written by measure/merger/process.py."""
    MERGER_RESTARTED = "merger-restarted"
    """Fields: exit_code, pid. Written by orchestrate/watch.py."""
    MERGER_STARTED = "merger_started"
    """Fields: fetch_wait_ms, linger_ms, owner_pid, recent_s, replicas, sink, topics. Written by
    measure/merger/process.py."""
    OUTPUT_CHECKED = "output-checked"
    """Fields: those of a record passed along. Written by orchestrate/deploy.py."""
    REPLICA_BACK = "replica-back"
    """Fields: behind_s, lag_s, max_lag_s, replica. Written by orchestrate/lag.py."""
    REPLICA_BEHIND = "replica-behind"
    """Fields: lag_s, replica, threshold_s. Written by orchestrate/lag.py."""
    REPLICA_BEHIND_AT_END = "replica-behind-at-end"
    """Fields: behind_s, lag_s, max_lag_s, replica. Written by orchestrate/lag.py."""
    REPLICA_CAUGHT_UP = "replica-caught-up"
    """Fields: by, catchup_s, offsets, replica. Written by orchestrate/rejoin.py."""
    REPLICA_DIED = "replica-died"
    """Fields: app_id, exit_code, pid, replica, uptime_s. Written by orchestrate/supervisor.py."""
    REPLICA_EXCLUDED = "replica-excluded"
    """Fields: message, remaining, replica. Written by orchestrate/watch.py."""
    REPLICA_EXECUTOR_LOST = "replica-executor-lost"
    """Fields: action, executors, pid, replica. Written by orchestrate/supervisor.py."""
    REPLICA_GAVE_UP = "replica-gave-up"
    """Fields: reason, replica, and those of a record passed along. Written by
    orchestrate/supervisor.py."""
    REPLICA_LAG = "replica-lag"
    """Fields: max_lag_s, threshold_s. Written by orchestrate/lag.py."""
    REPLICA_NOT_CAUGHT_UP = "replica-not-caught-up"
    """Fields: offsets, replica, restarted_at. Written by orchestrate/rejoin.py."""
    REPLICA_READY = "replica-ready"
    """Fields: app_id, attempt, pid, replica, startup_s. Written by orchestrate/supervisor.py."""
    REPLICA_RENICED = "replica-reniced"
    """Fields: after_s, behind_ms, pid, reniced, replica, why. Written by
    orchestrate/standbys.py."""
    REPLICA_RESTARTED = "replica-restarted"
    """Fields: attempt, downtime_s, pid, replica, restarts, and those of a record passed along.
    Written by orchestrate/supervisor.py."""
    REPLICA_SLOTS = "replica-slots"
    """Fields: master, note, warning. Written by orchestrate/deploy.py."""
    REPLICA_STARTED = "replica-started"
    """Fields: attempt, pid, reniced, replica, standby, and those of a record passed along. Written
    by orchestrate/standbys.py, orchestrate/supervisor.py."""
    REPLICA_STOPPED = "replica-stopped"
    """Fields: exit_code, graceful, leftover_pids, pid, replica. Written by
    orchestrate/supervisor.py."""
    REPLICAS_PROCESSING = "replicas-processing"
    """Fields: replicas. Written by orchestrate/deploy.py."""
    RUN_FAILED = "run-failed"
    """Fields: error. Written by orchestrate/deploy.py."""
    RUN_FINISHED = "run-finished"
    """Fields: results. Written by orchestrate/deploy.py."""
    RUN_STACK_STARTED = "run-stack-started"
    """Fields: kafka, zookeeper. Written by orchestrate/network.py."""
    RUN_STARTED = "run-started"
    """Fields: kafka, mode, replicas, run, sink_topic, source_topic, zookeeper. Written by
    orchestrate/deploy.py."""
    RUN_STOPPED = "run-stopped"
    """Fields: errors. Written by orchestrate/deploy.py."""
    SHARES_REMOVED = "cpu-shares-removed"
    """Fields: recovered, root. Written by faults/runner.py, orchestrate/deploy.py."""
    SPARK_HOME_REMOVED = "spark-home-removed"
    """Fields: recovered, and those of a record passed along. Written by faults/runner.py,
    orchestrate/deploy.py."""
    STANDBY_DIED = "standby-died"
    """Fields: exit_code, pid, standby. Written by orchestrate/standbys.py."""
    STANDBY_GAVE_UP = "standby-gave-up"
    """Fields: reason. Written by orchestrate/standbys.py."""
    STANDBY_PROMOTED = "standby-promoted"
    """Fields: after_s, replica, standby. Written by orchestrate/standbys.py."""
    STANDBY_READY = "standby-ready"
    """Fields: pid, standby, startup_s. Written by orchestrate/standbys.py."""
    STANDBY_STARTED = "standby-started"
    """Fields: cpu_shares, nice, pid, standby. Written by orchestrate/standbys.py."""
    STANDBY_STOPPED = "standby-stopped"
    """Fields: after_s, exit_code, graceful, leftover_pids, pid, ready, standby. Written by
    orchestrate/standbys.py."""
    STANDBYS_NOT_READY = "standbys-not-ready"
    """Fields: standbys, waited_s. Written by orchestrate/deploy.py."""
    STANDBYS_READY = "standbys-ready"
    """Fields: standbys, waited_s. Written by orchestrate/deploy.py."""
    STARTING_OFFSETS = "starting-offsets"
    """Fields: offsets, topic. Written by orchestrate/deploy.py."""
    WARNING = "warning"
    """Fields: code, component, kind, message, replica, and those of a record passed along. Written
    by measure/merger/process.py, orchestrate/deploy.py, orchestrate/lag.py,
    orchestrate/standbys.py, orchestrate/watch.py, workload/produce.py."""
    WORKLOAD_FINISHED = "workload-finished"
    """Fields: exit_code. Written by orchestrate/watch.py."""
    WORKLOAD_STARTED = "workload-started"
    """Fields: duration_s, rate, replay. Written by orchestrate/deploy.py."""


CHECK_FAILED = "check-failed"
"""The ``kind`` of the :attr:`Event.WARNING` deploy writes when the independent check could not
run: the report's completeness is then unknown, not the merger's counts."""
