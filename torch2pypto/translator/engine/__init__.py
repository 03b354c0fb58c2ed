"""The engine: one walk builds the scopes, candidate calls are resolved and bound, their rule
rewrites each call's own libcst tree, and the edits are spliced into the input text."""
