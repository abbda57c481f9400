"""Where a batch goes: the dispatch by kind, each kind's writes, dead letters and poison records."""
