{-# LANGUAGE NoImplicitPrelude #-}
{-|
Port names of the tops in "Tops" and "LoopTop" (a separate module:
annotations may only use imported functions).
-}
module TopPorts (ports) where

import Clash.Prelude

-- | Ports clk, rst, en, in_data, out_ready -> out_data, in_ready.
ports :: String -> TopEntity
ports name = Synthesize
  { t_name   = name
  , t_inputs = [ PortName "clk", PortName "rst", PortName "en"
               , PortName "in_data", PortName "out_ready" ]
  , t_output = PortProduct "" [PortName "out_data", PortName "in_ready"] }
