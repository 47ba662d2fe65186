"""The engine: features, rules, labels, stack window, stragglers, jobs, health, energy, verdict."""
