"""One module per bench command: its options, its report type (fields and table) and what it runs."""
