package httpapi_test

import (
	"testing"

	"erp/db/pgtest"
)

// The tests of this package run the whole application (apptest) and
// speak HTTP and websockets to it, as clients do.
func TestMain(m *testing.M) { pgtest.Main(m) }
