"""Where replicas run and how a fault reaches them: local processes (optionally in network
namespaces) and docker containers. Fault kinds say what a fault means; a target says how."""
