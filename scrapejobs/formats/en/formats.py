"""Date formats of the admin and the templates (FORMAT_MODULE_PATH): times with seconds, in the
ISO order, because an operator compares them with log lines and with each other."""

DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
