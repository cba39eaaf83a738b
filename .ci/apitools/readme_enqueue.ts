// Compiled by .ci/apitools.sh with tsc --strict against the types that
// openapi-typescript generates from the served document (openapi.d.ts,
// written next to this file in a scratch directory). The README's own
// enqueue request, {queue, payload} and nothing else, must be a valid
// body: a request field with a `default` in the document would be
// generated as required and refuse it.
import type { components, paths } from "./openapi";

type EnqueueBody = paths["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"];
type EnqueueRequest = components["schemas"]["EnqueueRequest"];

export const readmeRequest: EnqueueBody = { queue: "emails", payload: { to: "ada@example.com" } };
export const readmeList: EnqueueBody = [{ queue: "emails", payload: { to: "ada@example.com" } }];
export const onlyPayload: EnqueueRequest = { payload: { to: "ada@example.com" } };

// The types are not `any`: a wrong field type must not compile.
// @ts-expect-error priority is an integer
export const wrong: EnqueueRequest = { queue: "emails", priority: "high" };
