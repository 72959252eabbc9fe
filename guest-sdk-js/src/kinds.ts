/** Common built-in kinds. Declare others with `kind(...)`. */
import { kind } from "./metadata.js";

export const ConfigMap = kind("", "v1", "ConfigMap", "configmaps");
export const Secret = kind("", "v1", "Secret", "secrets");
export const Service = kind("", "v1", "Service", "services");
export const ServiceAccount = kind("", "v1", "ServiceAccount", "serviceaccounts");
export const Pod = kind("", "v1", "Pod", "pods");
export const PersistentVolumeClaim = kind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims");
export const Namespace = kind("", "v1", "Namespace", "namespaces", false);
export const Node = kind("", "v1", "Node", "nodes", false);
export const Deployment = kind("apps", "v1", "Deployment", "deployments");
export const StatefulSet = kind("apps", "v1", "StatefulSet", "statefulsets");
export const DaemonSet = kind("apps", "v1", "DaemonSet", "daemonsets");
export const Job = kind("batch", "v1", "Job", "jobs");
export const CronJob = kind("batch", "v1", "CronJob", "cronjobs");
export const Ingress = kind("networking.k8s.io", "v1", "Ingress", "ingresses");
