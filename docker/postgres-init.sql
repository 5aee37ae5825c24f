-- Runs once, on the first start of an empty data volume (docker-entrypoint-initdb.d).
-- The integration suite's SqlCatalog uses database `fencedlake` (POSTGRES_DB);
-- Lakekeeper keeps its own state in `lakekeeper`, owned by the same role.
CREATE DATABASE lakekeeper OWNER fencedlake;
