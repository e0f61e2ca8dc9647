"""Pipelines: the Spark driver program, replica runner, injector and merger."""
