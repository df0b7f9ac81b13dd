package main

import (
	"testing"

	"erp/app/apptest"
	"erp/db/pgtest"
)

// The names demo_test.go uses, on package apptest, until the demo and its
// tests move into their own package; then this file goes.

func TestMain(m *testing.M) { pgtest.Main(m) }

type (
	testServer = apptest.Server
	serverOpts struct{}
)

func newTestServer(t testing.TB, _ serverOpts) *testServer { return apptest.New(t) }

func gql[T any](t testing.TB, s *testServer, query string, vars map[string]any) T {
	t.Helper()
	return apptest.GQL[T](t, s, query, vars)
}
