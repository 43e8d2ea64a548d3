package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/devaipod/devaipod/internal/auditlog"
	"github.com/devaipod/devaipod/proxy/record"
)

// The proxy's audit records are package record's (standard library
// only, for the CLI); these names keep the proxy's code as it was.
type Record = record.Record

const (
	EventRequest = record.EventRequest
	EventPolicy  = record.EventPolicy
	EventDropped = record.EventDropped

	DecisionAllow        = record.DecisionAllow
	DecisionDeny         = record.DecisionDeny
	DecisionAsk          = record.DecisionAsk
	ReasonNotAllowed     = record.ReasonNotAllowed
	ReasonDenied         = record.ReasonDenied
	ReasonIPLiteral      = record.ReasonIPLiteral
	ReasonPrivateAddress = record.ReasonPrivateAddress
	ReasonTunnelLimit    = record.ReasonTunnelLimit
	ReasonBadRequest     = record.ReasonBadRequest
	ReasonUpstreamError  = record.ReasonUpstreamError
	ReasonIdleTimeout    = record.ReasonIdleTimeout
	ReasonShutdown       = record.ReasonShutdown
	ReasonCredentialHost = record.ReasonCredentialHost
	ReasonRejected       = record.ReasonRejected
	ReasonAskTimeout     = record.ReasonAskTimeout
	ReasonAskLimit       = record.ReasonAskLimit
	ReasonAskCanceled    = record.ReasonAskCanceled
	ReasonAskFailed      = record.ReasonAskFailed
	ReasonPathForbidden  = record.ReasonPathForbidden
	ReasonNoApprovals    = record.ReasonNoApprovals
	ReasonEncodedAnswer  = record.ReasonEncodedAnswer
)

// auditor writes records as whole lines, never two Writes at once. Request
// records wait in a batch, written once it holds auditBatchBytes or
// auditFlushDelay after its first record, whichever comes first: one
// write(2) per request record cost about 6-8% of the proxy's CPU per
// intercepted request, and in a pod each write to stdout also wakes conmon.
// Policy records are written at once, and so is the batch when Serve
// returns (finish), and every record after.
type auditor struct {
	pod string
	log *slog.Logger

	mu     sync.Mutex
	w      io.Writer
	failed bool
	batch  []byte        // whole request lines not yet written
	delay  time.Duration // the longest a record waits; zero is auditFlushDelay
	timer  *time.Timer   // writes batch; made at the first record
	armed  bool          // timer is set to write batch
	done   bool          // Serve has returned: each record goes out at once

	// flood counts the records of one kind past its bounds instead of
	// writing them (see floodKind); nil is no limit.
	flood *auditlog.Flood[floodKey]
}

// floodKey is a kind of records for the flood limit.
type floodKey struct{ decision, reason string }

// newAuditor returns an auditor of pod's records to w.
func newAuditor(pod string, log *slog.Logger, w io.Writer) *auditor {
	a := &auditor{pod: pod, log: log, w: w}
	a.flood = auditlog.NewFlood(a.writeDropped)
	return a
}

// floodKind is the kind of r that auditlog.Flood counts by, and false when
// r is always written: an allowed request that ended normally (the
// upstream and the network bound those). Every other record is one the
// agent can make as fast as it asks: a refusal, a request that waits for
// a person and gives up, an allowed one whose upstream failed. The kinds
// are the decisions and reasons, a fixed set.
func floodKind(r *Record) (floodKey, bool) {
	return floodKey{r.Decision, r.Reason}, r.Decision != DecisionAllow || r.Reason != ""
}

// KeepRecord tells whether an audit line (see Record) is kept when the
// bounded log file it is in is dropped (auditlog.Keep): every record but
// an allowed request that ended normally and that no person decided.
// Those are the records the agent can make without bound (as fast as an
// allowed host answers); a flood of them must not push out the record of
// what it was refused, which floodKind slows down. A line that is not a
// request record is kept.
//
// It looks at the bytes, not the JSON (a rotation reads 8 MiB of lines
// while the log waits): every quote the agent's text brings is escaped
// (appendJSONString, encoding/json), and no key of a proxy record is the
// agent's naming, so a key followed by its quote and colon is one the
// proxy wrote (FuzzKeepRecord). The gator's records, whose argument names
// are keys, are decoded instead (gator.KeepRecord).
func KeepRecord(line []byte) bool {
	routine := bytes.Contains(line, []byte(`"event":"request"`)) &&
		bytes.Contains(line, []byte(`"decision":"allow"`)) &&
		!bytes.Contains(line, []byte(`"reason":`)) &&
		!bytes.Contains(line, []byte(`"decided_by":`)) &&
		!bytes.Contains(line, []byte(`"rule":"ask:`))
	return !routine
}

const (
	// auditFlushDelay is how long a request record may wait to be
	// written: a reader of the log sees it at most this late.
	auditFlushDelay = 10 * time.Millisecond
	// auditBatchBytes is when a batch is written without waiting.
	auditBatchBytes = 32 << 10
)

func (a *auditor) write(r Record) {
	r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	r.Pod = a.pod
	b, err := json.Marshal(r)
	if err != nil {
		a.log.Error("audit: encode record", "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.batch = append(append(a.batch, b...), '\n')
	a.writeBatch()
}

// writeRequest adds a request record to the batch, encoded by hand: this
// is once per request, and encoding/json's reflection cost a few percent
// of the proxy's CPU per tunnel. The line is the same as write's, byte for
// byte.
func (a *auditor) writeRequest(r *Record) {
	if kind, limited := floodKind(r); limited && a.flood != nil && !a.flood.Allow(kind) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.batch = appendRequestLine(a.batch, time.Now(), a.pod, r)
	if len(a.batch) >= auditBatchBytes || a.done {
		a.writeBatch()
		return
	}
	if !a.armed {
		a.armed = true
		if a.delay == 0 {
			a.delay = auditFlushDelay
		}
		if a.timer == nil {
			a.timer = time.AfterFunc(a.delay, a.flush)
		} else {
			a.timer.Reset(a.delay)
		}
	}
}

// flush writes the batch.
func (a *auditor) flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed = false
	a.writeBatch()
}

// finish writes the batch and what was dropped, and every later record at
// once: a handler that outlives Serve's wait still gets its record out
// before the process closes the audit files.
func (a *auditor) finish() {
	a.mu.Lock()
	a.done = true
	a.writeBatch()
	a.mu.Unlock()
	if a.flood != nil {
		a.flood.Close()
	}
}

// writeDropped writes a record of the requests of each kind that were
// counted rather than written one by one.
func (a *auditor) writeDropped(dropped []auditlog.Dropped[floodKey]) {
	for _, d := range dropped {
		a.write(Record{Event: EventDropped, Decision: d.Kind.decision, Reason: d.Kind.reason, Count: d.Count,
			Since: d.Since.UTC().Format(time.RFC3339Nano)})
	}
}

// writeBatch writes the batch, with mu held.
func (a *auditor) writeBatch() {
	if len(a.batch) == 0 {
		return
	}
	if _, err := a.w.Write(a.batch); err != nil && !a.failed {
		a.failed = true // say it once; stdout going away is not worth a log line per request
		a.log.Error("audit: write", "err", err)
	}
	if cap(a.batch) > 4*auditBatchBytes {
		a.batch = nil // a record of a very long detail
	} else {
		a.batch = a.batch[:0]
	}
}

// appendRequestLine appends r as a request record (what Record.MarshalJSON
// writes for it, with time t in UTC and pod) and a newline.
func appendRequestLine(b []byte, t time.Time, pod string, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","pod":`...)
	b = appendJSONString(b, pod)
	b = append(b, `,"event":`...)
	b = appendJSONString(b, r.Event)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, r.Method)
	b = append(b, `,"host":`...)
	b = appendJSONString(b, r.Host)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(r.Port), 10)
	b = append(b, `,"decision":`...)
	b = appendJSONString(b, r.Decision)
	if r.Rule != "" {
		b = append(b, `,"rule":`...)
		b = appendJSONString(b, r.Rule)
	}
	if r.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, r.Reason)
	}
	if r.Detail != "" {
		b = append(b, `,"detail":`...)
		b = appendJSONString(b, r.Detail)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, `,"bytes_up":`...)
	b = strconv.AppendInt(b, r.BytesUp, 10)
	b = append(b, `,"bytes_down":`...)
	b = strconv.AppendInt(b, r.BytesDown, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, r.DurationMS, 10)
	b = appendNames(b, `,"credentials":[`, r.Credentials)
	b = appendNames(b, `,"masked":[`, r.Masked)
	if r.DecidedBy != "" {
		b = append(b, `,"decided_by":`...)
		b = appendJSONString(b, r.DecidedBy)
	}
	return append(b, "}\n"...)
}

// appendNames appends key (the JSON key, its colon and bracket) and the
// names as a JSON array, nothing for no names.
func appendNames(b []byte, key string, names []string) []byte {
	if len(names) == 0 {
		return b
	}
	b = append(b, key...)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name)
	}
	return append(b, ']')
}

// appendJSONString appends s as a JSON string exactly as encoding/json
// writes it: HTML-sensitive characters, control characters, U+2028 and
// U+2029 escaped, invalid UTF-8 replaced by \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
