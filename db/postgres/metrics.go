package postgres

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The engine's own figures for /metrics: a Store is a prometheus.Collector,
// which the API server registers when its store is one. They are this
// replica's; each replica reports its own.

var (
	descCommits = prometheus.NewDesc("fenceq_commits_total",
		"Transactions committed by this replica since it started (group commit: several mutations each).", nil, nil)
	descCommittedOps = prometheus.NewDesc("fenceq_committed_mutations_total",
		"Mutations carried by those transactions, refused ones included.", nil, nil)
	descPoolConns = prometheus.NewDesc("fenceq_postgres_pool_connections",
		"Connections of this replica's pool to PostgreSQL, by state.", []string{"state"}, nil)
	descHeadHeld = prometheus.NewDesc("fenceq_postgres_audit_head_held_seconds_total",
		"Time this replica's batches held the audit chain's head, from its lock reaching the replica to the commit's answer: every replica's commits take turns there, so the sum of its rate over the replicas near 1 means the chain is busy all the time and another replica adds no throughput.", nil, nil)
	descHeadTurns = prometheus.NewDesc("fenceq_postgres_audit_head_turns_total",
		"Batches of this replica that held the audit chain's head: every one that wrote, and one that took it at its start and then wrote nothing.", nil, nil)
	descSchema = prometheus.NewDesc("fenceq_postgres_schema_version",
		"The newest PostgreSQL schema version this build knows (of=\"build\") and the database's as this replica last saw it (of=\"database\"); a database above the build means a newer fenceq migrated it (this replica goes on serving unless the database's minimum writer version is above its own).", []string{"of"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCommits
	ch <- descCommittedOps
	ch <- descPoolConns
	ch <- descHeadHeld
	ch <- descHeadTurns
	ch <- descSchema
}

// Collect implements prometheus.Collector: commit counts, the pool's
// connections, the audit head's turns and the schema versions, read
// without a query.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	commits, ops := s.CommitStats()
	ch <- prometheus.MustNewConstMetric(descCommits, prometheus.CounterValue, float64(commits))
	ch <- prometheus.MustNewConstMetric(descCommittedOps, prometheus.CounterValue, float64(ops))
	st := s.pool.Stat()
	ch <- prometheus.MustNewConstMetric(descPoolConns, prometheus.GaugeValue, float64(st.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(descPoolConns, prometheus.GaugeValue, float64(st.AcquiredConns()), "in_use")
	ch <- prometheus.MustNewConstMetric(descHeadHeld, prometheus.CounterValue, time.Duration(s.headHeld.Load()).Seconds())
	ch <- prometheus.MustNewConstMetric(descHeadTurns, prometheus.CounterValue, float64(s.headBatches.Load()))
	ch <- prometheus.MustNewConstMetric(descSchema, prometheus.GaugeValue, float64(SchemaVersion()), "build")
	ch <- prometheus.MustNewConstMetric(descSchema, prometheus.GaugeValue, float64(s.gate.seen.Load()), "database")
}
