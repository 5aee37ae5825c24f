"""Read planning (PROTOCOL.md §14; driver): batch scans and stream offsets."""
