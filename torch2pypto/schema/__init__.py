"""What the op table is made of: entries (schema.entry) and kernel families (schema.family).

Below both the table loader (torch2pypto.mapping) and the families (torch2pypto.rules), which
import it and not each other's internals.
"""
