"""Spark-facing glue (thin): the data source, its batch and streaming writers, the driver steps they call."""
