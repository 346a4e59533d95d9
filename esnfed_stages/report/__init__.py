"""The report layer: the t-tests, the papers' tables and every other table's text, the figures,
the report's index and the DVC plots, from the assess files and the studies' outputs."""
