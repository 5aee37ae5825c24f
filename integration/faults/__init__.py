"""Network faults between the apps under test and the real services.

* :mod:`.toxiproxy` -- a client of Shopify's toxiproxy (``integration/services/toxiproxy.sh``):
  a TCP proxy per app and service, with latency, resets, cut responses, stalls and
  partitions on its links; reusable by benchmarks.
* :mod:`.inprocess` -- request-aware proxies inside the test process: an S3 HTTP proxy that
  faults a chosen request (a WAL put, a data upload), a PostgreSQL proxy that loses one
  catalog commit.
"""
