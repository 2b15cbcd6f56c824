"""memsvc's rules: plain values in, plain values out, no Flask."""
