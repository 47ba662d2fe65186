"""What every part shares: the Frame model, the metric table, the classifier's records, terminal-safe text."""
