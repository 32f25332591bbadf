"""Workers talking over Redis Streams: who owns a host, the entries and their codec, Lua
scripts, the connection (monitor), the transport and the engine's side of it (relay)."""
