"""The host helpers generated code carries: real functions, linted and unit-tested here.

A translation never imports this package (generated code imports torch, pypto and the standard
library only): :func:`torch2pypto.rules.codegen.copied` copies the source of the helpers it uses
into the generated section, with the helpers they use in turn. A helper's block is its run of
top-level statements and the comment lines right above it; a comment meant for this package
alone stands apart, after a blank line. Imports between these modules are not copied; a kernel
factory a helper calls is imported from :mod:`.generated`, whose stubs stand for the factories
a translation generates.
"""
