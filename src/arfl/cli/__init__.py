"""The command-line layer: the only place that prints, prompts or exits."""
