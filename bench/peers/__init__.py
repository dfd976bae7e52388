"""slotflow beside its peers (issue 15): the harness (`make bench`), installers and one adapter per
system. Each adapter is a script run by the harness; see run.py for the contract they share."""
