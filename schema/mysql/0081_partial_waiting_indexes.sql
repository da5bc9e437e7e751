-- Nothing to change here: sqlite/0081_partial_waiting_indexes.sql makes two SQLite indexes of
-- the waiting set partial; MariaDB has no partial indexes. The file keeps the two dialects'
-- migration numbers in step.
DO 0;
