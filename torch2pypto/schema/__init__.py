"""What the op table is made of: entries (schema.entry), kernel families (schema.family) and
the tensor methods Python's operators call (schema.operators), the APIs the table maps them by.

Below both the table loader (torch2pypto.mapping) and the families (torch2pypto.rules), which
import it and not each other's internals.
"""
