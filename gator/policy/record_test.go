package policy

import "testing"

func TestParseRecord(t *testing.T) {
	t.Parallel()
	if _, err := ParseRecord([]byte(`{"time":"t","pod":"p","event":"request","host":"x"}`)); err == nil {
		t.Error("a proxy record parsed as a gator record")
	}
	rec, err := ParseRecord([]byte(`{"time":"t","kind":"gator","event":"call","tool":"get_issue","decision":"deny","duration_ms":1}`))
	if err != nil || rec.Tool != "get_issue" || rec.Decision != "deny" {
		t.Errorf("ParseRecord = %+v, %v", rec, err)
	}
}
