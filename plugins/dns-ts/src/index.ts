// The component's entry: what `wasmctrl build` componentizes.
import { exportReconciler } from "@wasmctrl/sdk/component";

import { DnsReconciler } from "./dns.js";

export const { metadata, reconcile } = exportReconciler(new DnsReconciler());
