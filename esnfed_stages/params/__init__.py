"""The params tree: params.yaml loaded and checked as a whole once (load, schema), and the typed
sections more than one stage reads (experiment budgets and runner, data, heterogeneity)."""
