package demo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSeedDayRefusesAnAfternoonItCannotActOut: day.json's afternoon is
// checked before anything is sent; each edit below would fail mid-replay
// or, on a second run, act on the first run's documents.
func TestSeedDayRefusesAnAfternoonItCannotActOut(t *testing.T) {
	t.Parallel()
	day, err := SeedDay()
	require.NoError(t, err)
	require.NoError(t, day.checkAfternoon())

	for _, tc := range []struct {
		name string
		edit func(*Afternoon)
		want string
	}{
		{"a shop order with a fixed sync_id", func(a *Afternoon) { a.Production.ShopOrders = []int{1, 5} },
			"afternoon.production.shopOrders.0 1 has the fixed externalId shop-demo-0001"},
		{"no such shop order", func(a *Afternoon) { a.Cancellation.ShopOrder = 6 },
			"afternoon.cancellation.shopOrder 6 is not a position in shopOrders (1…5)"},
		{"nothing to make", func(a *Afternoon) { a.Production.ShopOrders = []int{2, 4} },
			"afternoon.production.shopOrders.1: shop order 4 has no line of a product"},
		{"shipping what was not made", func(a *Afternoon) { a.Shipment.ShopOrder = 3 },
			"afternoon.shipment.shopOrder 3 is not produced"},
		{"cancelling what is in production", func(a *Afternoon) { a.Cancellation.ShopOrder = 5 },
			"afternoon.cancellation.shopOrder 5 is produced"},
		// A wardrobe is chipboard and edging, which the day's receipt of
		// oak and lacquer does not bring.
		{"materials not in stock", func(a *Afternoon) { a.Production.ShopOrders = []int{2, 3} },
			"afternoon.production issues 18.5 of МАТ-КРОМ, the receipt brings 0 to СКЛ-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := day
			d.Afternoon.Production.ShopOrders = append([]int(nil), day.Afternoon.Production.ShopOrders...)
			tc.edit(&d.Afternoon)
			require.ErrorContains(t, d.checkAfternoon(), tc.want)
		})
	}
}
