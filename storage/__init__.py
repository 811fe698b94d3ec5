"""One replica's partition log: a segmented log in LMDB."""
