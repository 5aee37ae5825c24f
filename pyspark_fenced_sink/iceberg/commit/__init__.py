"""The one catalog commit (PROTOCOL.md step 5, §5; driver): the port, its producers, branches, manifests."""
