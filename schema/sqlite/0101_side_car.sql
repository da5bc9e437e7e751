-- SQLite twin of mysql/0101_side_car.sql (the comment there explains the column).
ALTER TABLE merge_batch ADD COLUMN side INTEGER NOT NULL DEFAULT 0;
