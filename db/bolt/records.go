package bolt

import (
	"bytes"
	"fmt"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	"github.com/vmihailenco/msgpack/v5"
)

const jobRecordVersion = 1

// jobRecord is the stored form of a job: a version and the rules' record,
// whose tags are the short stored names (never reused). Times are Unix
// nanoseconds (0 = unset); JSON values are stored as their JSON bytes.
// Golden files in testdata/records pin the format.
type jobRecord struct {
	V uint8 `msgpack:"v"`
	db.JobRecord
}

// errorRecord is one failure in a job record's history.
type errorRecord = db.ErrorRecord

// jobRecordOf is rec as it is written: the current record version.
func jobRecordOf(rec db.JobRecord) *jobRecord {
	return &jobRecord{V: jobRecordVersion, JobRecord: rec}
}

func encodeRecord(v any) ([]byte, error) {
	// The bytes go to bbolt, which keeps them until the commit: each record
	// gets its own buffer; only the encoder is pooled.
	buf := bytes.NewBuffer(make([]byte, 0, 256))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decodeJob(b []byte) (*jobRecord, error) {
	// jobRecord decodes itself and bounds its allocations (DecodeMsgpack),
	// so the walk msgrec.Unmarshal makes first is not needed here.
	var r jobRecord
	if err := msgrec.Decode(b, r.DecodeMsgpack); err != nil {
		return nil, fmt.Errorf("%w: job: %v", db.ErrCorrupt, err)
	}
	if r.V == 0 || r.V > jobRecordVersion || r.ID == 0 || !db.ValidState(r.State) {
		return nil, fmt.Errorf("%w: job %d: version %d, state %q", db.ErrCorrupt, r.ID, r.V, r.State)
	}
	return &r, nil
}

func (r *jobRecord) job() db.Job { return r.JobRecord.Job() }
