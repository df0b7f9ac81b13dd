package db

import (
	"slices"
	"testing"
)

// A list filter accepts every status a document can reach, so a status
// added to a lifecycle cannot be left out of its filter.
func TestStatusListsCoverLifecycles(t *testing.T) {
	t.Parallel()
	for k, statuses := range map[*DocKind][]string{
		SalesOrders: SalesOrderStatuses, ProductionOrders: ProductionOrderStatuses,
		PurchaseOrders: PurchaseOrderStatuses, WarehouseMoves: WarehouseMoveStatuses,
	} {
		for from, next := range k.next {
			for _, s := range append([]string{from}, next...) {
				if !slices.Contains(statuses, s) {
					t.Errorf("%s status %q is missing from its filter's statuses %v", k.Noun, s, statuses)
				}
			}
		}
	}
}
