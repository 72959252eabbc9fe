// The component's entry: what `wasmctrl build` componentizes.
import { exportReconciler } from "@wasmctrl/sdk/component";

import { WebAppAdmission, WebAppReconciler } from "./webapp.js";

export const { metadata, reconcile, outbound, webhooks, validate, mutate } = exportReconciler(new WebAppReconciler(), {
  validator: new WebAppAdmission(),
  defaulter: new WebAppAdmission(),
});
