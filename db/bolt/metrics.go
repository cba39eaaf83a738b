package bolt

import "github.com/prometheus/client_golang/prometheus"

// The engine's own figures for /metrics: a Store is a prometheus.Collector,
// which the API server registers when its store is one.

func desc(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }

var (
	descCommits = desc("fenceq_commits_total",
		"Write transactions committed by the store since it was opened (group commit: several mutations each).")
	descCommittedOps = desc("fenceq_committed_mutations_total",
		"Mutations carried by those commits, refused ones included.")
	descReadTxs = desc("fenceq_bolt_read_tx_total",
		"bbolt read transactions started since the store was opened.")
	descOpenReadTxs = desc("fenceq_bolt_open_read_tx",
		"bbolt read transactions open now.")
	descPageWrites = desc("fenceq_bolt_page_writes_total",
		"Pages written by bbolt commits since the store was opened.")
	descWriteSeconds = desc("fenceq_bolt_write_seconds_total",
		"Time bbolt commits spent writing pages (fsync included) since the store was opened.")
	descSpillSeconds = desc("fenceq_bolt_spill_seconds_total",
		"Time bbolt commits spent preparing dirty pages since the store was opened.")
	descFreePages = desc("fenceq_bolt_free_pages",
		"Pages on bbolt's freelist, free for reuse.")
	descPendingPages = desc("fenceq_bolt_pending_pages",
		"Freed pages still visible to an open read transaction.")
	descFileSize = desc("fenceq_db_file_size_bytes",
		"Size of the bbolt file on disk.")
)

var engineDescs = []*prometheus.Desc{descCommits, descCommittedOps, descReadTxs, descOpenReadTxs,
	descPageWrites, descWriteSeconds, descSpillSeconds, descFreePages, descPendingPages, descFileSize}

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range engineDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: commit counts and bbolt's
// statistics, read at scrape time without a transaction.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	commits, ops := s.CommitStats()
	counter(descCommits, float64(commits))
	counter(descCommittedOps, float64(ops))

	fs, err := s.FileStats()
	counter(descReadTxs, float64(fs.ReadTxs))
	gauge(descOpenReadTxs, float64(fs.OpenReadTxs))
	counter(descPageWrites, float64(fs.PageWrites))
	counter(descWriteSeconds, fs.WriteTime.Seconds())
	counter(descSpillSeconds, fs.SpillTime.Seconds())
	gauge(descFreePages, float64(fs.FreePages))
	gauge(descPendingPages, float64(fs.PendingPages))
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descFileSize, err)
	} else {
		gauge(descFileSize, float64(fs.SizeBytes))
	}
}
