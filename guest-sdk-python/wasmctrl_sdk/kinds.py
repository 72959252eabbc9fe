"""Common built-in kinds. Declare others with :class:`wasmctrl_sdk.Kind`."""

from .metadata import Kind

CONFIG_MAP = Kind("", "v1", "ConfigMap", "configmaps")
SECRET = Kind("", "v1", "Secret", "secrets")
SERVICE = Kind("", "v1", "Service", "services")
SERVICE_ACCOUNT = Kind("", "v1", "ServiceAccount", "serviceaccounts")
POD = Kind("", "v1", "Pod", "pods")
PERSISTENT_VOLUME_CLAIM = Kind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims")
NAMESPACE = Kind("", "v1", "Namespace", "namespaces", namespaced=False)
NODE = Kind("", "v1", "Node", "nodes", namespaced=False)
DEPLOYMENT = Kind("apps", "v1", "Deployment", "deployments")
STATEFUL_SET = Kind("apps", "v1", "StatefulSet", "statefulsets")
DAEMON_SET = Kind("apps", "v1", "DaemonSet", "daemonsets")
JOB = Kind("batch", "v1", "Job", "jobs")
CRON_JOB = Kind("batch", "v1", "CronJob", "cronjobs")
INGRESS = Kind("networking.k8s.io", "v1", "Ingress", "ingresses")
