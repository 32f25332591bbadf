"""Small pieces every layer may use: the exceptions, crash-safe file replacement, giving
large temporaries back to the OS."""
