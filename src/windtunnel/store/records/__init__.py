"""Typed records: one pydantic model per file a run directory (`records.run_dir`) or a driver's --out
(`records.drivers`) holds, and the only code that reads or writes that file. Readers get typed objects, not dicts;
every older format a released version wrote is upgraded here, in one place, on read; what is written is byte for
byte what the dict-literal writers wrote before (key order, indentation, float formatting)."""
