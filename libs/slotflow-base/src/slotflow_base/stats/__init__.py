"""The stats worker's side the api reads too: its histograms, its counters, the schema it writes."""
