"""Operations: the fencedlake CLI, gc and read-only inspection of a table's protocol state."""
