-- Nothing to change here: sqlite/0080_partial_indexes.sql makes four SQLite indexes partial
-- (rows with NULL left out); MariaDB has no partial indexes. The file keeps the two dialects'
-- migration numbers in step.
DO 0;
