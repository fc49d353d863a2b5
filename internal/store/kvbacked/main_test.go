package kvbacked_test

import (
	"os"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked/kvbackedtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kvbackedtest.Stop()
	os.Exit(code)
}

var (
	backends  = kvbackedtest.KVBackends
	openLocal = kvbackedtest.OpenLocalKV
	openEtcd  = kvbackedtest.OpenEtcdKV
)

// counting counts the calls made through it (kvbackedtest.Counting).
type counting = kvbackedtest.Counting
