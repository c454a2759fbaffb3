"""Assemble step (the build): the raw structure, or the compiled reader's columns, into the
columnar model: events, segments and annotations, with interned strings, frames and stacks."""
