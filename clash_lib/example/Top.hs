{-# LANGUAGE DataKinds, NoImplicitPrelude, TypeApplications, TemplateHaskell #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The synthesizable top entity: the network, the predicted class, and
AXI4-Stream style ports ("K2C.Axi").

Ports: @clk@, @rst@, @en@ (tie high); @s_axis_tdata@ (one beat = the 4 input
values, element 0 in the lowest 16 bits), @s_axis_tvalid@, @s_axis_tlast@
(high: every beat is a whole input vector) in, @s_axis_tready@ out;
@m_axis_tdata@ (score j in bits [16j+15 : 16j], the class in the top 2 bits),
@m_axis_tvalid@, @m_axis_tlast@ out, @m_axis_tready@ in; @tlast_error@ out.
-}
module Top where

import Clash.Prelude

import K2C.Activation (argmax)
import K2C.Axi (AxiIn, AxiOut, ResultData, axiStream)
import K2C.Stream (Stream, mapS, (|>))
import Network

-- | Input beats per input vector.
type BeatsPerImage = 1

-- | Values per input beat.
type BeatWidth = 4

-- | The classes: scores, and the index of the highest score (ties: lowest index).
type Classes = 3

-- | The network with the class appended; the knobs chosen for this design.
core :: HiddenClockResetEnable dom => Stream dom Input (Output, Index Classes)
core = network (SNat @2) (SNat @2) (SNat @1) (SNat @3) (SNat @2) (SNat @0) |> mapS withClass
  where
    withClass scores = (scores, argmax scores)

topEntity
  :: Clock System
  -> Reset System
  -> Enable System
  -> AxiIn System BeatWidth Act (AxiOut System (ResultData Classes Act))
topEntity clk rst en = withClockResetEnable clk rst en (axiStream (SNat @BeatsPerImage) core)
{-# NOINLINE topEntity #-}
{-# ANN topEntity
  (Synthesize
    { t_name   = "network"
    , t_inputs = [ PortName "clk", PortName "rst", PortName "en"
                 , PortName "s_axis_tdata", PortName "s_axis_tvalid", PortName "s_axis_tlast"
                 , PortName "m_axis_tready" ]
    , t_output = PortProduct ""
                   [ PortName "s_axis_tready"
                   , PortName "m_axis_tdata", PortName "m_axis_tvalid", PortName "m_axis_tlast"
                   , PortName "tlast_error" ]
    }) #-}
