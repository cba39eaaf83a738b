package api

import "connectrpc.com/connect"

// Test hooks for rpc_test.go (package api_test).

// RPCCodeForTest is the gRPC code an API code is answered with.
func RPCCodeForTest(code string) connect.Code { return rpcCode(code) }

// RPCRoutesForTest maps each RPC procedure to the JSON route whose rules
// it follows, and the role it needs.
func RPCRoutesForTest() map[string][2]string {
	out := map[string][2]string{}
	for p, m := range rpcMethods {
		out[p] = [2]string{m.route, string(rpcNeeds(m))}
	}
	return out
}
