"""The Iceberg adapter: catalogs, the catalog commit port, schemas, partition specs, data-file codec."""
