-- fenceq schema 5: the minimum writer version. The oldest fenceq release
-- allowed to write to this database; every writing batch reads it with the
-- audit head row it locks anyway, and a replica built below it stops
-- serving (schema.go). A migration that brings in what older builds cannot
-- honour raises it to the migrating build's version: such a migration
-- carries the marker line that store.go's raisesMinWriterMark names (this
-- one does not).
-- Expand-only: a column with a default, which a replica of v0.1.0 (which
-- names the head's columns) neither reads nor writes.

ALTER TABLE fenceq_audit_head
    ADD COLUMN min_writer text NOT NULL DEFAULT 'v0.0.0';
